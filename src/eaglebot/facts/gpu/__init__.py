"""GPU facts: nvidia-smi and fuser, GPU health readings and their verdict, the kernel log's Xids, DCGM."""
