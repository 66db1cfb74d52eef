"""vdevice package."""
