/*
 * Pipeline schedules and the step of a measured training job: the cost
 * models behind `plan train` (docs/planner.md, "Planning the training job
 * from the knowledge base") and the 1F1B span the transformer step model
 * shares with it. The planners gather measurements and name their sources;
 * every formula that turns them into seconds is here.
 */
#include "model/model.h"

#include <math.h>

/* ------------------------------------------------------------ 1F1B */

double model_1f1b_time(int M, int nstages, const double *stage_s, int v, int *crit)
{
    double tmax = 0, tsum = 0;
    int at = 0;
    for (int i = 0; i < nstages; i++) {
        if (stage_s[i] > tmax) {
            tmax = stage_s[i];
            at = i;
        }
        tsum += stage_s[i];
    }
    if (crit)
        *crit = at;
    return M * tmax + (tsum - tmax) / (v > 0 ? v : 1);
}

double model_1f1b_p2p_time(int M, int nstages, double msg_s)
{
    return nstages > 1 ? 2.0 * (M + nstages - 2) * msg_s : 0;
}

double model_1f1b_bound(int M, int L, int nstages, const double *per_layer_s)
{
    double inv = 0;
    for (int i = 0; i < nstages; i++)
        inv += 1 / per_layer_s[i];
    return M * L / inv;
}

double model_1f1b_uniform_bound(int M, int L, int pp, double per_layer_s)
{
    return (double)M * ((L + pp - 1) / pp) * per_layer_s;
}

/* ------------------------------------------------- measured compute */

void model_job_rank_fit(model_job_rank *r)
{
    double sb = 0, st = 0, sbb = 0, sbt = 0;
    for (int i = 0; i < r->n; i++) {
        sb += r->b[i];
        st += r->t[i];
        sbb += (double)r->b[i] * r->b[i];
        sbt += r->b[i] * r->t[i];
    }
    double den = r->n * sbb - sb * sb;
    r->c = r->n > 1 && den > 0 ? (r->n * sbt - sb * st) / den : st / sb;
    r->a = r->n > 1 && den > 0 ? (st - r->c * sb) / r->n : 0;
    if (r->c <= 0 || r->a < 0) { /* an unphysical line: through the origin */
        r->a = 0;
        r->c = st / sb;
    }
}

double model_job_fwd_bwd(const model_job_rank *r, int m)
{
    if (m <= 0)
        return 0;
    for (int i = 0; i + 1 < r->n; i++)
        if (m >= r->b[i] && m <= r->b[i + 1])
            return r->t[i] + (r->t[i + 1] - r->t[i]) * (m - r->b[i]) / (r->b[i + 1] - r->b[i]);
    if (r->n == 1 && m == r->b[0])
        return r->t[0];
    return r->a + r->c * m;
}

double model_job_compute(const model_job_rank *r, int b, int m)
{
    return b <= 0 ? 0 : (b / m) * model_job_fwd_bwd(r, m) + model_job_fwd_bwd(r, b % m);
}

double model_job_last_backward(const model_job_rank *r, int b, int m)
{
    if (b <= 0)
        return 0;
    int last = b % m ? b % m : m;
    return MODEL_BWD_FRACTION * model_job_fwd_bwd(r, last);
}

double model_job_stage_share(double whole, int layers, int L) { return whole * layers / L; }

double model_job_act_bytes(int m, int ctx, int dim) { return (double)m * ctx * dim * 4; }

/* ------------------------------------------------- measured allreduce */

double model_p2p_from_pair_allreduce(double t2) { return t2 / 2; }

int model_fit_line_rel(int n, const double *x, const double *t, double *A, double *B)
{
    double s00 = 0, s01 = 0, s11 = 0, r0 = 0, r1 = 0;
    for (int i = 0; i < n; i++) {
        double w = 1 / (t[i] * t[i]);
        s00 += w;
        s01 += w * x[i];
        s11 += w * x[i] * x[i];
        r0 += w * t[i];
        r1 += w * x[i] * t[i];
    }
    double det = s00 * s11 - s01 * s01;
    if (n < 2 || !(det > 0))
        return 0;
    *A = (r0 * s11 - r1 * s01) / det;
    *B = (s00 * r1 - s01 * r0) / det;
    if (*B <= 0)
        return 0;
    if (*A < 0)
        *A = 0;
    return 1;
}

void model_ring_from_line(double A, double B, int p, double *alpha, double *beta)
{
    *alpha = A / (2.0 * (p - 1));
    *beta = B * p / (2.0 * (p - 1));
}

/* ------------------------------------------------------------- DDP */

int model_ddp_buckets(double grad_bytes, double cap_bytes, double *sizes, int max)
{
    double done = 0;
    int k = 0;
    while (done < grad_bytes && k < max) {
        double lim = k == 0 ? MODEL_DDP_FIRST_BUCKET : cap_bytes;
        double sz = fmin(lim, grad_bytes - done);
        done += sz;
        sizes[k++] = sz;
    }
    return k;
}

double model_ddp_last_bucket(double G, double capb)
{
    double first = G < MODEL_DDP_FIRST_BUCKET ? G : MODEL_DDP_FIRST_BUCKET;
    double rest = G - first;
    return rest > 0 ? rest - capb * ceil(rest / capb - 1) : first;
}

double model_ddp_beside_fraction(double G, double capb)
{
    return (G - model_ddp_last_bucket(G, capb)) / G;
}

double model_ddp_reduction_end(int nranks, const model_ddp_rank *r, double beside, int nbuckets,
                               const double *sizes, const double *secs, double G)
{
    double done = 0, end = 0;
    for (int k = 0; k < nbuckets; k++) {
        done += sizes[k];
        double q = done / G, ready = 0;
        for (int i = 0; i < nranks; i++)
            ready = fmax(ready, r[i].compute_s - (1 - q) * r[i].last_bwd_s +
                                    fmin(q, beside) / (beside > 0 ? beside : 1) * r[i].lost_s);
        end = fmax(end, ready) + secs[k];
    }
    return end;
}
