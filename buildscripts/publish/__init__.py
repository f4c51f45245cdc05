"""Publishing: the tag policy (candidate and good tags), the registry, and promotion by digest.

Fifth step of the flow: it reads judged results and moves tags only for what was verified on a GPU.
"""
