"""mcpvisor's benchmark suite: what the proxy costs, as ratios against calling the upstream
directly and against the proxies users would pick instead, in one run.

Run ``python -m mcpvisor.bench --quick`` (or ``mcpvisor bench``); see ``bench/README.md``.
"""
