"""OpenStack asked directly: openstacksdk, or plain HTTP on the kept route. The one door is connect.py."""
