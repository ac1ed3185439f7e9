"""diff stage."""
