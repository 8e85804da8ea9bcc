/* Loaded with LD_PRELOAD by tests/ct2_paths.py on CPUs that are not Intel's, in the MKL lanes
   only. Intel MKL (linked into CTranslate2) asks mkl_serv_cpu_detect() which kernels to run;
   on a CPU whose vendor is not Intel it answers 0, MKL's generic kernels: 6x slower than
   Intel's and not the code an Intel user runs (benchmarks/results/mkl_kernels.md). Answering
   the code MKL gives an Intel CPU of the forced instruction set runs Intel's kernels.
   MKL_CPU_TYPE is set when this file is compiled: 3 AVX, 5 AVX2, 7 AVX-512. */
int mkl_serv_cpu_detect(void) { return MKL_CPU_TYPE; }
