"""Every function Spark runs as a task: one module per kind of unit (CONTRIBUTING "Where code goes")."""
