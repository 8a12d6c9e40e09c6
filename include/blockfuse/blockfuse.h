// blockfuse — fused kernels for the transformer decoder block. Umbrella header.
#pragma once

#include "blockfuse/add_rmsnorm.h"
#include "blockfuse/attention.h"
#include "blockfuse/common.h"
#include "blockfuse/cross_entropy.h"
#include "blockfuse/decode_attention.h"
#include "blockfuse/decode_gemm.h"
#include "blockfuse/fused_mlp.h"
#include "blockfuse/fp8.h"
#include "blockfuse/gated_up.h"
#include "blockfuse/gated_up_fp8.h"
#include "blockfuse/swiglu.h"
#include "blockfuse/weight_layout.h"
#include "blockfuse/version.h"
