import os

# Worker processes start through a forkserver, shared by all the tests of a session (as in a user's program).
os.environ.setdefault("PYTHONWARNINGS", "ignore::DeprecationWarning")
