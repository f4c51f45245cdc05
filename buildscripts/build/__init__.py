"""Building: the OS base image, then one `docker buildx build` per cell over shared layer stages.

Third step of the flow: it reads cells and their locks and produces images under candidate tags.
"""
