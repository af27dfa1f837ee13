"""The paper's study: the grid of cells and its parts, the statistics, the report, its figures
and the statement texts that ``isingattn reproduce`` writes to ``results/reproduce/``.

It lives beside the library, not in it: nothing in ``isingattn`` imports it but the command
line's ``reproduce`` verb (``isingattn.cli.study``, which calls :mod:`isingattn_study.reproduce`), which finds it in a source
checkout. The models, tasks, training and run folders it uses are the library's
(``isingattn.models``).
"""
