"""The environment variables that set the emulator's watchdogs (light: the CLIs read them at start-up without
loading the emulator)."""
YIELD_BUDGET_ENV = "RAMMER_EMU_YIELD_BUDGET"    # overrides the default budgets (the CLIs' --yield-budget sets it)
STALL_TIMEOUT_ENV = "RAMMER_EMU_STALL_TIMEOUT"  # seconds; 0 turns the stall watchdog off (--stall-timeout)
