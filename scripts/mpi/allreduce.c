/* The Open MPI side of scripts/bench-allreduce: MPI_Allreduce timed the way gputune times
 * its own (per size: warm-up, barrier, `iters` operations back to back on the wall clock,
 * time = elapsed / iters, averaged over ranks), out of place, f32 sum, with an exact check
 * of the result. Prints one line per size: "size time_us". */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    if (argc != 5) {
        if (rank == 0) fprintf(stderr, "usage: allreduce MINBYTES MAXBYTES ITERS WARMUP\n");
        MPI_Finalize();
        return 2;
    }
    long min = atol(argv[1]), max = atol(argv[2]);
    int iters = atoi(argv[3]), warmup = atoi(argv[4]);
    size_t cap = (size_t)(max / 4 > 0 ? max / 4 : 1);
    float *in = malloc(cap * sizeof(float)), *out = malloc(cap * sizeof(float));
    if (!in || !out) {
        fprintf(stderr, "allreduce: cannot allocate %ld bytes\n", max);
        MPI_Abort(MPI_COMM_WORLD, 3);
    }
    int bad = 0;
    for (long size = min; size <= max; size *= 2) {
        size_t count = (size_t)(size / 4 > 0 ? size / 4 : 1);
        for (size_t i = 0; i < count; i++) in[i] = (float)(rank + 1 + (i % 7));
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double us = (MPI_Wtime() - start) * 1e6 / iters, sum = 0;
        MPI_Reduce(&us, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
        for (size_t i = 0; i < count; i++) {
            float want = (float)(world * (world + 1) / 2 + world * (long)(i % 7));
            if (out[i] != want) bad++;
        }
        if (rank == 0) printf("%zu %.3f\n", count * 4, sum / world);
        fflush(stdout);
    }
    int total = 0;
    MPI_Reduce(&bad, &total, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && total) fprintf(stderr, "allreduce: %d wrong elements\n", total);
    free(in);
    free(out);
    MPI_Finalize();
    return total ? 1 : 0;
}
