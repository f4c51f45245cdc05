"""The release watch: what the package index holds that matrix.yaml does not, and the proposal that follows.

Above the lock (it locks a proposal) and beside report and publish; it builds through the `build` command
as a process, never by importing the pipeline.
"""
