"""GPU-seconds per user over a span, for billing on a shared machine: gputop's own
addition to the collector (nvitop has no per-user accounting)."""

import time

from gputop import ResourceMetricCollector

with ResourceMetricCollector(interval=0.2) as collector:
    time.sleep(1.5)  # a billing period
    usage = collector.usage()

print(f"over {usage['seconds']:.1f} s:")
for user, figures in sorted(usage["users"].items(), key=lambda row: -row[1].gpu_seconds):
    print(
        f"{user:<16} {figures.gpu_seconds:8.1f} GPU-s  "
        f"{figures.gpu_memory_byte_seconds / 2**30:8.1f} GiB-s  GPUs {figures.gpus}"
    )
