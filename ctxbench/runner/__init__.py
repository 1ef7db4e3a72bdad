"""Running a grid: settings from loose values, the plan and its cost, the cells left to run, suites,
``--trials auto`` and many processes. The CLI and the Python API both call :func:`run_task`."""
