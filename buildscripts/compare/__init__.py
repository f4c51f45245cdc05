"""Two images compared file by file: what a container of each sees, and why each difference is there.

`saved` reads an image as the engine saves it (`docker save`, streamed: no copy on disk) into its config and, per
layer, its members in order; the file system a container sees is the layers applied one on another (whiteouts
included). `diff` sorts every difference into one reason (content, bytecode of the same source, owner/mode,
mtime, member order, config); `render` writes the console lines, the JSON record and its Markdown page.
"""
