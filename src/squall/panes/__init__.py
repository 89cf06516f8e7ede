"""The pane engine: Beam/Apex windows, triggers and accumulations, pure Python, time passed in."""
