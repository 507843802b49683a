"""Unit tests of the lab's simulator pieces (stand-ins, hub, nodes, paths, ssh, web faults), run without a lab."""
