"""Who waited for whom: wait states (wait_states.py), the waits' causes carried back along chains (propagation.py),
the training steps (steps.py), each rank against its peers (peers.py) and the straggler verdict (stragglers.py)."""
