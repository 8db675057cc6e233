"""Training: one loop over a Task (loop.py; the interface a task implements is task.py) and the steps it calls
after an update (progress.py: log, NaN check, validation, checkpoint; budget.py: the time limit and forecast), its
checkpoints and run directory (checkpoint.py), a fine-tune's starting weights (init_from.py), Adam and the
learning-rate schedules (optim.py), the label-smoothed loss (loss.py)."""
