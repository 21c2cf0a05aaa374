"""The GPU memory an inference call leaves allocated: Device.memory_used() before and after,
as with nvitop's Device."""

from gputop import Device


def run_inference():
    pass  # the model's forward pass


device = Device(0)
before = device.memory_used()
run_inference()
after = device.memory_used()
print(f"{device.name()}: {before} bytes before, {after} after, {(after - before) / 2**20:+.1f} MiB")
