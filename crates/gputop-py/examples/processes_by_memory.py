"""Each GPU's memory and utilization, then its processes, largest GPU memory first: as
nvitop's Device and GpuProcess are used; only the import differs from nvitop's."""

from gputop import Device

for device in Device.all():
    print(f"GPU {device.index}: {device.memory_usage()}, {device.gpu_utilization()}% busy")
    processes = sorted(device.processes().values(), key=lambda p: p.gpu_memory(), reverse=True)
    for process in processes:
        print(f"  {process.pid:>7} {process.username():<12} {process.gpu_memory_human():>10} {process.name()}")
