"""GPU telemetry behind one Sampler interface (nvml, smi, sim come with the telemetry
issue; `off` is the only source today). Only this package knows NVML."""
