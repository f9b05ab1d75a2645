"""What a torch.distributed launch is to gpu-widgets, without widgets: the rank environment, the
launch's run directory, each rank's heartbeat and forward time, and the straggler verdict."""
