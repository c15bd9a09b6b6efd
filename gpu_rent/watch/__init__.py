"""The background tunnel process and its watchdog: keeps the tunnel up and brings a preempted VM back."""
