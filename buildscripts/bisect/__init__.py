"""Bisecting a lock change: which packages, moved from a good lock to a bad one, turn a cell from pass to fail.

The lock diff (`diff`), the changes that must move together (`groups`), the search over them with a build
callback (`search`), and what is handed back (`report`). Above `lock` (it reads locks and asks its resolver) and
`results` (records, decisive lines); the command that builds a step lives in commands/bisect.py.
"""
