"""What experiments' ``figures(run_dirs)`` draw with: a matplotlib figure as inline SVG
(``svg.py``) and the multi-tenant charts (``tenant_charts.py``). They only display stored
runs, so they sit outside every design hash (harness/design.py's SCORING_ONLY), and below the
site that calls the figures hooks."""
