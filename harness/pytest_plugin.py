"""pytest plugin placeholder"""
