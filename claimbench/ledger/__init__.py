"""What runs cost: the ledger, the budget, prices and the budget gate in front of `run`."""
