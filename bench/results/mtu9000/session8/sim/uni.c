/* A non-adaptive reference: every arm once, then the rest of 31 calls
 * round-robin over the arms measured within 1.1x of the best; the lowest
 * mean of logs wins. Same synthetic buckets as sim.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
static unsigned long long st = 88172645463325252ULL;
static double U(void){st^=st<<13;st^=st>>7;st^=st<<17;return (st>>11)*(1.0/9007199254740992.0);}
static double G(void){double u=U(),v=U();return sqrt(-2*log(1-u))*cos(2*M_PI*v);}
int main(int argc,char**argv){
  double truth[] = {1.00, 1.00, 1.01, 1.02, 1.035, 1.035, 1.05, 1.1, 1.15, 1.3, 1.6, 2.0, 1.04, 1.08};
  int na=14,runs=atoi(argv[1]); double sp=atof(argv[2]),cl=atof(argv[3]); int m3=0,m5=0; double sr=0;
  for(int r=0;r<runs;r++){double tt[14],sum[14]={0};int n[14]={0};double bt=1e9;
    for(int i=0;i<na;i++){tt[i]=truth[i]*exp(0.02*G());if(tt[i]<bt)bt=tt[i];}
    #define OBS(i) do{double y=log(tt[i])+cl*G(); if(U()<sp) y+=0.08+0.17*U(); sum[i]+=y;n[i]++;}while(0)
    for(int i=0;i<na;i++) OBS(i);
    int left=31-na; double best=1e9; for(int i=0;i<na;i++) if(sum[i]/n[i]<best) best=sum[i]/n[i];
    int cand[14],nc=0; for(int i=0;i<na;i++) if(sum[i]/n[i]<=best+log(1.1)) cand[nc++]=i;
    for(int k=0;k<left;k++) OBS(cand[k%nc]);
    int ch=0; for(int i=1;i<na;i++) if(sum[i]/n[i]<sum[ch]/n[ch]) ch=i;
    double ra=tt[ch]/bt; sr+=ra; m3+=ra>1.03; m5+=ra>1.05;}
  printf("uniform: runs %d: choice >1.03x %.3f, >1.05x %.3f, mean ratio %.4f\n",runs,(double)m3/runs,(double)m5/runs,sr/runs);
}
