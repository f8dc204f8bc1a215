def plot(*args, **kwargs):  # placeholder until plot.py lands
    raise NotImplementedError
