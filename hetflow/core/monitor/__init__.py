"""The activity monitor's state (Chimera 3.5, HexGen-Flow 4, Kairos 4-6) as plain dataclasses, and the one
function that turns it into a balancer's cluster snapshot."""
