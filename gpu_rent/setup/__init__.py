"""`gpu-rent setup`: asks, checks the login, writes the project folder. It rents nothing."""
