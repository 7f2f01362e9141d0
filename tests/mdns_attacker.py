"""The hostile host of tests/test_swarm_mdns_hostile.py, run inside its own network namespace:
sends crafted mDNS answers (unsolicited, as anyone on a LAN can) from one address. Usage:
python mdns_attacker.py JSON, where JSON is {"ip": ADDR, "actions": [[KIND, ITEMS], ...]} and
KIND is "adverts" (ITEMS: [node_id, room, host, port]) or "goodbyes" (ITEMS: node ids)."""

from __future__ import annotations

import json
import socket
import sys

from zeroconf import DNSOutgoing, DNSPointer, ServiceInfo, Zeroconf, const

from sapo_edge.swarm.protocol import PROTOCOL_VERSION

SERVICE = "_sapo-edge._tcp.local."


def main() -> None:
    args = json.loads(sys.argv[1])
    zc = Zeroconf(interfaces=[args["ip"]])
    try:
        for kind, items in args["actions"]:
            for item in items:
                out = DNSOutgoing(const._FLAGS_QR_RESPONSE | const._FLAGS_AA)
                if kind == "adverts":
                    node_id, room, host, port = item
                    info = ServiceInfo(
                        SERVICE,
                        f"sapo-{node_id}.{SERVICE}",
                        addresses=[socket.inet_aton(host)],
                        port=port,
                        properties={
                            "v": str(PROTOCOL_VERSION),
                            "room": room,
                            "id": node_id,
                            "port": str(port),
                        },
                        server=f"sapo-{node_id[:16]}.local.",
                    )
                    records = [info.dns_pointer(), info.dns_service(), info.dns_text()]
                    records += info.dns_addresses()
                else:  # a goodbye: the service's PTR with TTL 0
                    name = f"sapo-{item}.{SERVICE}"
                    records = [DNSPointer(SERVICE, const._TYPE_PTR, const._CLASS_IN, 0, name)]
                for r in records:
                    out.add_answer_at_time(r, 0)
                zc.send(out)
    finally:
        zc.close()
    print("sent", flush=True)


if __name__ == "__main__":
    main()
