/* The MPI side of scripts/hosts-bench.sh (issue 37): one collective over
 * float32 at sizes b, b*f, ... up to e, each timed as osu_allreduce and
 * goccl bench time it (warm calls, a barrier, then iters calls back to
 * back; the time is the mean over ranks of each rank's average), printed
 * by rank 0 as goccl bench's CSV rows so that the script puts them in the
 * same table:
 *   op,ranks,transport,size,count,type,redop,root,algo,time_us,algbw,busbw,wrong,sent_per_rank
 * The size is the whole buffer as nccl-tests and goccl bench take it: an
 * allgather's receive buffer (each rank gives size/ranks), a reduce-
 * scatter's send buffer (each rank gets size/ranks). Every call is out of
 * place: Open MPI 4.1.4's HAN crashes on in-place allreduce from 1 MiB
 * (open-mpi/ompi#11473). With check set, one more call after the timed
 * ones is compared with the known answer (the #wrong column).
 *
 *   hosts-bench-mpi op b e f warm iters label check
 *   op: allreduce | allgather | reducescatter; label: the algo column */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ALLREDUCE, ALLGATHER, REDUCESCATTER };

static void call(int op, const float *s, float *r, long count, long block) {
	switch (op) {
	case ALLREDUCE:
		MPI_Allreduce(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		break;
	case ALLGATHER:
		MPI_Allgather(s, (int)block, MPI_FLOAT, r, (int)block, MPI_FLOAT, MPI_COMM_WORLD);
		break;
	case REDUCESCATTER:
		MPI_Reduce_scatter_block(s, r, (int)block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
		break;
	}
}

int main(int argc, char **argv) {
	MPI_Init(&argc, &argv);
	int rank, n;
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	if (argc != 9) {
		if (rank == 0) fprintf(stderr, "usage: hosts-bench-mpi op b e f warm iters label check\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	const char *opname = argv[1], *label = argv[7];
	long b = atol(argv[2]), e = atol(argv[3]), f = atol(argv[4]);
	int warm = atoi(argv[5]), iters = atoi(argv[6]), check = atoi(argv[8]);
	int op = ALLREDUCE;
	if (!strcmp(opname, "allreduce"))
		op = ALLREDUCE;
	else if (!strcmp(opname, "allgather"))
		op = ALLGATHER;
	else if (!strcmp(opname, "reducescatter"))
		op = REDUCESCATTER;
	else {
		if (rank == 0) fprintf(stderr, "hosts-bench-mpi: -op %s: only allreduce, allgather, reducescatter\n", opname);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	if (b < 4 || f < 2 || e < b) {
		if (rank == 0) fprintf(stderr, "hosts-bench-mpi: sizes %ld to %ld by %ld\n", b, e, f);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	/* Where the ranks are, as Open MPI sees it: each rank's host name and
	 * how many ranks share rank 0's node. With the namespaces taken for
	 * nodes these are goccl-host0..H-1, L ranks each; one node would
	 * have HAN see no hierarchy and vader carry everything. */
	char name[MPI_MAX_PROCESSOR_NAME] = {0}, *names = NULL;
	int len;
	MPI_Get_processor_name(name, &len);
	if (rank == 0) names = calloc((size_t)n, sizeof name);
	MPI_Gather(name, sizeof name, MPI_CHAR, names, sizeof name, MPI_CHAR, 0, MPI_COMM_WORLD);
	MPI_Comm node;
	int local;
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
	MPI_Comm_size(node, &local);
	MPI_Comm_free(&node);
	if (rank == 0) {
		printf("# %s: ranks' hosts", label);
		for (int i = 0; i < n; i++) printf(" %s", names + i * sizeof name);
		printf("; rank 0's node has %d of %d ranks\n", local, n);
		free(names);
	}

	/* Each buffer at its largest, once: the sends hold rank+1. */
	long emax = e / 4;
	float *s = malloc((emax + 1) * sizeof *s), *r = malloc((emax + 1) * sizeof *r);
	if (!s || !r) MPI_Abort(MPI_COMM_WORLD, 1);
	for (long i = 0; i <= emax; i++) s[i] = (float)(rank + 1);
	const float sum = (float)n * (n + 1) / 2;
	const double factor = op == ALLREDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;

	/* Sizes round down to whole elements, and for allgather and reduce-
	 * scatter to whole blocks a rank, as goccl bench and nccl-tests do. */
	const long unit = op == ALLREDUCE ? 4 : 4L * n;
	for (long step = b; step <= e; step *= f) {
		long size = step / unit * unit, count = size / 4, block = count / n;
		for (int i = 0; i < warm; i++) call(op, s, r, count, block);
		MPI_Barrier(MPI_COMM_WORLD);
		double t = MPI_Wtime();
		for (int i = 0; i < iters; i++) call(op, s, r, count, block);
		t = (MPI_Wtime() - t) / iters;

		long wrong = 0;
		if (check) {
			MPI_Barrier(MPI_COMM_WORLD);
			long m = op == ALLREDUCE ? count : op == ALLGATHER ? block * n : block;
			for (long i = 0; i < m; i++) r[i] = -1;
			call(op, s, r, count, block);
			for (long i = 0; i < m; i++) {
				float want = op == ALLGATHER ? (float)(i / block + 1) : sum;
				wrong += r[i] != want;
			}
		}
		double mine[2] = {t, (double)wrong}, all[2];
		MPI_Reduce(mine, all, 2, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
		if (rank == 0) {
			double us = all[0] / n * 1e6, algbw = us > 0 ? size / (us * 1e3) : 0;
			printf("%s,%d,ompi,%ld,%ld,float32,%s,-1,%s,%.3f,%.4f,%.4f,%ld,0\n", opname, n, size, count,
			       op == ALLGATHER ? "none" : "sum", label, us, algbw, algbw * factor, (long)all[1]);
			fflush(stdout);
		}
	}
	free(s);
	free(r);
	MPI_Finalize();
	return 0;
}
