"""Entry-point targets for the plug-in registry tests: a good task, and each way a plug-in goes wrong."""

from dataclasses import replace

from ctxbench.tasks.passkey import TASK as _PASSKEY

GOOD = replace(_PASSKEY, name="mytask", help="a plug-in's task")
MISNAMED = replace(_PASSKEY, name="othername")
COLLIDING = replace(_PASSKEY, name="passkey", help="a plug-in that wants the built-in's name")
NOT_A_TASK = {"name": "dict"}
