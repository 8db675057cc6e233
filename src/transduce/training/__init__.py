"""Training: one loop over a Task (loop.py; the interface a task implements is task.py), its checkpoints and run
directory (checkpoint.py), Adam and the learning-rate schedules (optim.py), the label-smoothed loss (loss.py)."""
