/// Process supervision, scenarios, metrics, invariants, reports and load generation live here.
public enum AskSimulation {}
