"""Everything that touches a large matrix: planning, blocked kernel products, factorisations."""

from ._blocking import (MAX_TILE_BYTES, PRODUCT_TILE_BYTES_PER_THREAD, BlockPlan, MemoryBudgetError, available_memory,
                        format_bytes, observe_blocks, plan_blocks, plan_rows, product_tile_bytes, row_blocks)
from ._plan import (CROSS_SCRATCH_MIN_BYTES, DIRECT_TILE_BYTES, DISTANCE_TILE_BYTES, FACTOR_COLUMN_MIN_BYTES,
                    KMEANS_BLOCK_BYTES, KMEANS_MAX_CHUNK_BYTES, KMEANS_TILE_BYTES, SKETCH_SLAB_BYTES,
                    STATISTIC_BLOCK_BYTES, SVM_BATCH_BYTES, TASK_MIN_BYTES, MIN_WORK_BYTES, MiB, SHARES, SHIFT_SAMPLE_ROWS, STREAM_READ_BYTES, ExecutionPlan,
                    NystroemPlan, active_plan, current_plan, default_memory_budget, nystroem_plan, planned_call)
from ._cg import CGResult, CGState, conjugate_gradient
from ._engines import LocalEngine, distributed_engine, engine_for, register_engine
from ._eig import DENSE_SERIAL_MAX_N, ConvergenceWarning, EigResult, auto_method, nystrom_start, top_eigenpairs
from ._factor import CholeskyFactor, NumericalWarning, blocked_cholesky, jittered_cholesky
from ._mixed import (MixedSolveInfo, fill_lower_gram, fill_mixed_gram, gram_tile_plan, mixed_precision_solve,
                     symmetric_matvec)
from ._operator import KernelOperator, Statistics
from ._protocol import ProductOperator
from ._sym_gram import SymmetricGram
from ._preconditioner import FalkonPreconditioner, falkon_solve_bytes, lower_gram
from ._source_blocks import source_rows, tensor_blocks
from ._stream import STREAMED_METHODS, StreamedMethodsMixin, map_rows, source_to_memory

__all__ = [
    "DENSE_SERIAL_MAX_N",
    "CROSS_SCRATCH_MIN_BYTES",
    "DIRECT_TILE_BYTES",
    "DISTANCE_TILE_BYTES",
    "FACTOR_COLUMN_MIN_BYTES",
    "KMEANS_BLOCK_BYTES",
    "KMEANS_MAX_CHUNK_BYTES",
    "KMEANS_TILE_BYTES",
    "SKETCH_SLAB_BYTES",
    "STATISTIC_BLOCK_BYTES",
    "SVM_BATCH_BYTES",
    "TASK_MIN_BYTES",
    "MiB",
    "ExecutionPlan",
    "MIN_WORK_BYTES",
    "NystroemPlan",
    "SHARES",
    "SHIFT_SAMPLE_ROWS",
    "STREAM_READ_BYTES",
    "active_plan",
    "current_plan",
    "nystroem_plan",
    "planned_call",
    "MAX_TILE_BYTES",
    "PRODUCT_TILE_BYTES_PER_THREAD",
    "BlockPlan",
    "CGResult",
    "CGState",
    "CholeskyFactor",
    "ConvergenceWarning",
    "EigResult",
    "FalkonPreconditioner",
    "KernelOperator",
    "LocalEngine",
    "ProductOperator",
    "Statistics",
    "engine_for",
    "MemoryBudgetError",
    "MixedSolveInfo",
    "NumericalWarning",
    "STREAMED_METHODS",
    "StreamedMethodsMixin",
    "SymmetricGram",
    "auto_method",
    "available_memory",
    "blocked_cholesky",
    "conjugate_gradient",
    "default_memory_budget",
    "distributed_engine",
    "falkon_solve_bytes",
    "fill_lower_gram",
    "fill_mixed_gram",
    "format_bytes",
    "gram_tile_plan",
    "jittered_cholesky",
    "lower_gram",
    "map_rows",
    "mixed_precision_solve",
    "nystrom_start",
    "observe_blocks",
    "plan_blocks",
    "plan_rows",
    "product_tile_bytes",
    "register_engine",
    "row_blocks",
    "source_rows",
    "source_to_memory",
    "symmetric_matvec",
    "tensor_blocks",
    "top_eigenpairs",
]
