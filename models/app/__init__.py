"""The application on top of the model library: the ``isingattn`` command line, the experiment
grid behind ``isingattn reproduce``, its reports and plots, checkpoint evaluation and run
folders. The library (:mod:`isingattn`, :mod:`isingattn.inference`, :mod:`isingattn.models`)
never imports it."""
