"""Layout arithmetic and Megatron Bridge's layout tables, below the planner, the estimates and the rules."""
