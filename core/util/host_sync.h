// Reads of device values on the host. A read the dispatcher names (`item`) is counted by the host
// work meter (core/meter/host_work.h); a copy to the host is not distinguishable there from any other
// copy, so code that brings a device tensor to the host calls to_host, which notes the read, on the
// CPU as well (the same call that blocks on a GPU).
#pragma once
#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>

namespace memfine {

// Reads noted so far by to_host, in this process (the meter takes differences).
std::atomic<int64_t>& noted_host_reads();

// `t` on the host: a blocking copy where it lives on a device, noted as one read.
at::Tensor to_host(const at::Tensor& t);
// A read made another way (a collective's result copied back to the host).
void note_host_read();

}  // namespace memfine
