"""The randomized differential test's machinery, one job per module.

``tests/test_fuzz.py`` holds the pytest tests and their options; this package holds what they
drive:

- ``spec``: a draw: input arrays and a short list of NetBuilder calls (``Spec``, ``Step``);
- ``values``: random dimensions, data values, index values and fill values;
- ``forms``: the shapes and attributes of each operator form (take, gather, gather_nd, scatter,
  scatter_nd, and the element forms with ``dims``);
- ``producers``: computed operands placed in front of the operator (take, reshape, fill);
- ``draws``: draw ``k`` of a seed (``choose`` then ``realize``), and new values for a draw;
- ``evaluate``: the numpy reference run of a draw and the index errors it must raise;
- ``externals``: the same operator in PyTorch and in ONNX's reference evaluator;
- ``check``: compiling a draw with cinnlite, running it and comparing with the references;
- ``shrink``: a smaller draw that fails the same way;
- ``reproducer``: a draw as a self-contained Python script;
- ``runner``: the loop over draws, run in a child process so that a crash is reported.

Draw ``k`` of seed ``s`` is always the same program and data: every module that draws takes
its random numbers from the one generator ``np.random.default_rng([s, k])``, in a fixed order.
"""
