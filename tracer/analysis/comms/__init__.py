"""Communication: the collectives' instances (collectives.py) and the matched messages (p2p.py), their bandwidth
(bandwidth.py), and the alpha-beta model fitted beside the volumes the algorithms must move (alpha_beta.py)."""
