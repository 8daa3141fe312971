# shellcheck shell=bash
# free_ports N: N distinct loopback ports free now, on one line, taken below the kernel's
# ephemeral range (the rule of loadtest/apiproxy/src/ports.rs). A port from bind(:0) is an
# ephemeral one, and an outgoing connection may take it before the process it was picked for
# binds it.
free_ports() {
    python3 - "${1:-1}" <<'PY'
import random, socket, sys

wanted = int(sys.argv[1])
lowest = 10000
try:
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        below = int(f.read().split()[0])
except (OSError, ValueError, IndexError):
    below = 32768
below = max(below, lowest + 1000)
found = []
for port in random.sample(range(lowest, below), below - lowest):
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
    found.append(str(port))
    if len(found) == wanted:
        print(" ".join(found))
        break
else:
    sys.exit(f"fewer than {wanted} free loopback ports in {lowest}..{below}")
PY
}
