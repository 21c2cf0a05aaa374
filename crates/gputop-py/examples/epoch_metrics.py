"""GPU and host use per training epoch, logged as nvitop's ResourceMetricCollector logs it:
only the import differs from nvitop's."""

import time

from gputop import Device, ResourceMetricCollector


def train_one_epoch():
    time.sleep(0.3)  # the model's work


collector = ResourceMetricCollector(Device.all(), interval=0.1).start(tag="train")
for epoch in range(3):
    collector.start(tag="epoch")
    train_one_epoch()
    metrics = collector.collect()
    collector.stop(tag="epoch")
    memory = {
        key: round(value)
        for key, value in metrics.items()
        if key.startswith("train/epoch/") and key.endswith("memory_used (MiB)/mean")
    }
    print(f"epoch {epoch}: {memory}")
collector.stop()
