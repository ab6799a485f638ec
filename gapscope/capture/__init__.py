"""Driving Nsight Systems: finding nsys, building and running the profile command (``nsys``)."""
