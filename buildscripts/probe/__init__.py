"""The probe: what runs inside the image under test (or in a host Python environment).

Standard library only, so that it runs with the image's own Python and nothing is installed into
the image under test. It never imports from the rest of `buildscripts`. Each stage prints one
structured result line (see core.RESULT_PREFIX) that the host side reads.
"""
