"""What runs on a target: standard library only, shipped whole to a remote host's interpreter."""
