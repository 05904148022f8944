"""An object-store run's tasks and Ray Train workers on any node (see driver.py).

item_paths.py    the local paths inside a task's work item: find them, move them
transfer.py      files between a node's mirror and the bucket, trusted by sha256
driver.py        the driver's side (dispatch, collect, what the commit lists and skips)
task_call.py     the task's side (fetch, run in a private folder, upload)
"""
