"""The task layer: hosts one component instance per task for every runner."""
