"""Assembling and driving nodes: the runner (run --headless, sim), the round loop's control,
run folders, evaluation, doctor, the exit summary and signals, plain-text remedies for errors,
and the pace choice on this machine."""
