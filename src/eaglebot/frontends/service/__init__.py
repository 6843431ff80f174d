"""`eagle serve`'s runtime: the composition root (serve.py), the scheduler, the leader lease,
the reload, the metrics endpoint and the HTTP front door. Above the front ends' shared parts
and Slack's app, which it wires; below `cli/`, which starts it. Nothing below imports it
(.importlinter's contract "eagle serve's runtime")."""
