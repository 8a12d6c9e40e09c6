// quick smoke + bench for decode attention (not committed)
#include <blockfuse/decode_attention.h>
#include <cuda_bf16.h>
#include <cstdio>
#include <cmath>
#include <vector>
#include <random>
#include <algorithm>
#include <string>
using namespace blockfuse;
#define CK(x) do{cudaError_t e=(x); if(e){printf("cuda %s line %d\n", cudaGetErrorString(e), __LINE__); exit(1);} }while(0)
static float bf(float x){ return __bfloat162float(__float2bfloat16(x)); }
struct Case { int B, Sq, Hq, Hkv, D; std::vector<int> lens; int page; int splits; bool causal; int wl; float softcap; bool append; bool interleaved; int rot; };
int fails=0;
void run_case(const Case& c, std::mt19937& rng) {
  int cap = 0; for (int l: c.lens) cap = std::max(cap, l + (c.append? c.Sq:0)); cap = std::max(cap, 1) + 5;
  int page = c.page, maxb = 0, nblocks;
  if (page) { maxb = (cap + page - 1)/page; nblocks = c.B*maxb + 3; } else { nblocks = c.B; }
  int rows_per_block = page ? page : cap;
  size_t cache_elems = (size_t)nblocks * rows_per_block * c.Hkv * c.D;
  std::normal_distribution<float> nd(0,1);
  std::vector<__nv_bfloat16> hk(cache_elems), hv(cache_elems), hq((size_t)c.B*c.Sq*c.Hq*c.D), hkn((size_t)c.B*c.Sq*c.Hkv*c.D), hvn(hkn.size());
  for (auto& x: hk) x = __float2bfloat16(NAN); for (auto& x: hv) x = __float2bfloat16(NAN);
  std::vector<int> table(std::max(1, c.B*maxb), -7);
  if (page) { std::vector<int> perm(nblocks); for (int i=0;i<nblocks;i++) perm[i]=i; std::shuffle(perm.begin(), perm.end(), rng); for (int i=0;i<c.B*maxb;i++) table[i]=perm[i]; }
  auto slot = [&](int b, int j, int h)->size_t { int blk=b,row=j; if(page){blk=table[b*maxb+j/page]; row=j%page;} return (((size_t)blk*rows_per_block+row)*c.Hkv+h)*c.D; };
  for (int b=0;b<c.B;b++) for (int j=0;j<c.lens[b];j++) for(int h=0;h<c.Hkv;h++) for(int d=0;d<c.D;d++){ hk[slot(b,j,h)+d]=__float2bfloat16(nd(rng)); hv[slot(b,j,h)+d]=__float2bfloat16(nd(rng)); }
  for (auto& x: hq) x=__float2bfloat16(nd(rng)); for (auto& x: hkn) x=__float2bfloat16(nd(rng)); for (auto& x: hvn) x=__float2bfloat16(nd(rng));
  int maxpos = cap + 2, R = c.rot ? c.rot : c.D;
  std::vector<float> cosT((size_t)maxpos*R/2), sinT(cosT.size());
  for (int p=0;p<maxpos;p++) for(int i=0;i<R/2;i++){ double th = p * std::pow(10000.0, -2.0*i/R); cosT[p*R/2+i]=cos(th); sinT[p*R/2+i]=sin(th);}  
  // reference: build effective q, caches
  std::vector<float> qe(hq.size()); for(size_t i=0;i<hq.size();i++) qe[i]=__bfloat162float(hq[i]);
  std::vector<float> ke(cache_elems), ve(cache_elems); for(size_t i=0;i<cache_elems;i++){ke[i]=__bfloat162float(hk[i]); ve[i]=__bfloat162float(hv[i]);}
  auto rope = [&](float* x, int pos){ std::vector<float> y(x, x+c.D); for(int d=0;d<R;d++){ int i,pr; float sg; if(c.interleaved){i=d/2;pr=d^1;sg=(d&1)?1:-1;} else {bool lo=d<R/2; i=lo?d:d-R/2; pr=lo?d+R/2:d-R/2; sg=lo?-1:1;} y[d]=bf(x[d]*cosT[pos*R/2+i]+sg*x[pr]*sinT[pos*R/2+i]); } for(int d=0;d<c.D;d++) x[d]=y[d]; };
  if (c.append) for(int b=0;b<c.B;b++) for(int t=0;t<c.Sq;t++){ int pos=c.lens[b]+t; for(int h=0;h<c.Hq;h++) rope(&qe[(((size_t)b*c.Sq+t)*c.Hq+h)*c.D], pos); for(int h=0;h<c.Hkv;h++){ float* dk=&ke[slot(b,pos,h)]; float* dv=&ve[slot(b,pos,h)]; for(int d=0;d<c.D;d++){dk[d]=__bfloat162float(hkn[(((size_t)b*c.Sq+t)*c.Hkv+h)*c.D+d]); dv[d]=__bfloat162float(hvn[(((size_t)b*c.Sq+t)*c.Hkv+h)*c.D+d]);} rope(dk,pos);} }
  int G = c.Hq/c.Hkv; double scale = 1.0/sqrt(c.D);
  std::vector<double> ref(hq.size()), reflse((size_t)c.B*c.Hq*c.Sq);
  for(int b=0;b<c.B;b++){ int L=c.lens[b]+(c.append?c.Sq:0); for(int t=0;t<c.Sq;t++) for(int h=0;h<c.Hq;h++){ int pos=L-c.Sq+t; int lo = c.wl>=0? std::max(0,pos-c.wl):0; int hi = c.causal? std::min(L-1,pos): L-1;
    std::vector<double> s; double mx=-INFINITY; const float* q=&qe[(((size_t)b*c.Sq+t)*c.Hq+h)*c.D];
    for(int j=lo;j<=hi;j++){ const float* k=&ke[slot(b,j,h/G)]; double a=0; for(int d=0;d<c.D;d++) a+=(double)q[d]*k[d]; a*=scale; if(c.softcap>0) a=c.softcap*tanh(a/c.softcap); s.push_back(a); mx=std::max(mx,a);} 
    double sum=0; for(double& x: s){x=exp(x-mx); sum+=x;}
    double* o=&ref[(((size_t)b*c.Sq+t)*c.Hq+h)*c.D]; for(int d=0;d<c.D;d++) o[d]=0;
    for(int j=lo;j<=hi;j++){ const float* v=&ve[slot(b,j,h/G)]; for(int d=0;d<c.D;d++) o[d]+=s[j-lo]/sum*v[d]; }
    reflse[((size_t)b*c.Hq+h)*c.Sq+t] = s.empty()? -INFINITY : mx+log(sum); } }
  // device
  __nv_bfloat16 *dq,*dk,*dv,*dout,*dkn,*dvn; int *dlen,*dtab; float *dlse,*dcos,*dsin; void* ws;
  CK(cudaMalloc(&dq,hq.size()*2)); CK(cudaMalloc(&dk,cache_elems*2)); CK(cudaMalloc(&dv,cache_elems*2)); CK(cudaMalloc(&dout,hq.size()*2)); CK(cudaMalloc(&dkn,hkn.size()*2+16)); CK(cudaMalloc(&dvn,hkn.size()*2+16));
  CK(cudaMalloc(&dlen,c.B*4)); CK(cudaMalloc(&dtab,table.size()*4)); CK(cudaMalloc(&dlse,reflse.size()*4)); CK(cudaMalloc(&dcos,cosT.size()*4)); CK(cudaMalloc(&dsin,cosT.size()*4));
  CK(cudaMemcpy(dq,hq.data(),hq.size()*2,cudaMemcpyHostToDevice)); CK(cudaMemcpy(dk,hk.data(),cache_elems*2,cudaMemcpyHostToDevice)); CK(cudaMemcpy(dv,hv.data(),cache_elems*2,cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dkn,hkn.data(),hkn.size()*2,cudaMemcpyHostToDevice)); CK(cudaMemcpy(dvn,hvn.data(),hvn.size()*2,cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dlen,c.lens.data(),c.B*4,cudaMemcpyHostToDevice)); CK(cudaMemcpy(dtab,table.data(),table.size()*4,cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dcos,cosT.data(),cosT.size()*4,cudaMemcpyHostToDevice)); CK(cudaMemcpy(dsin,sinT.data(),cosT.size()*4,cudaMemcpyHostToDevice));
  CK(cudaMemset(dout,0xff,hq.size()*2)); CK(cudaMemset(dlse,0xff,reflse.size()*4));
  DecodeAttentionParams prm; prm.causal=c.causal; prm.window_left=c.wl; prm.softcap=c.softcap; prm.num_splits=c.splits;
  if(page){prm.block_table=dtab; prm.max_blocks=maxb;}
  AttnConstTensor q = make_attn_tensor((const void*)dq, DType::kBF16, c.B, c.Sq, c.Hq, c.D);
  AttnTensor kc = make_attn_tensor((void*)dk, DType::kBF16, nblocks, rows_per_block, c.Hkv, c.D), vc = make_attn_tensor((void*)dv, DType::kBF16, nblocks, rows_per_block, c.Hkv, c.D);
  AttnTensor out = make_attn_tensor((void*)dout, DType::kBF16, c.B, c.Sq, c.Hq, c.D);
  int64_t capk = page ? (int64_t)maxb*page : cap;
  size_t wsb = decode_attention_workspace_size(c.B,c.Sq,c.Hq,c.Hkv,c.D,capk,c.splits,c.append); CK(cudaMalloc(&ws, wsb+16));
  try {
  if(c.append){ RotaryParams rp; rp.cos=dcos; rp.sin=dsin; rp.fp32=true; rp.rotary_dim=R; rp.max_positions=page? maxb*page+2 : maxpos; rp.interleaved=c.interleaved;
    decode_attention_with_kvcache(q,kc,vc,make_attn_tensor((const void*)dkn,DType::kBF16,c.B,c.Sq,c.Hkv,c.D),make_attn_tensor((const void*)dvn,DType::kBF16,c.B,c.Sq,c.Hkv,c.D),dlen,rp,out,dlse,prm,ws,wsb);
  } else decode_attention(q,kc,vc,dlen,out,dlse,prm,ws,wsb);
  } catch (std::exception& e) { printf("EXC %s\n", e.what()); fails++; return; }
  CK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> ho(hq.size()); std::vector<float> hl(reflse.size());
  CK(cudaMemcpy(ho.data(),dout,ho.size()*2,cudaMemcpyDeviceToHost)); CK(cudaMemcpy(hl.data(),dlse,hl.size()*4,cudaMemcpyDeviceToHost));
  double maxerr=0, maxlse=0; for(size_t i=0;i<ho.size();i++){ double e=fabs(__bfloat162float(ho[i])-ref[i]); if(!(e<=maxerr)) maxerr = std::isnan(e)? 1e9 : e; }
  for(size_t i=0;i<hl.size();i++){ double a=hl[i], r=reflse[i]; double e = (std::isinf(r)&&a==r)?0: fabs(a-r); if(!(e<=maxlse)) maxlse = std::isnan(e)?1e9:e; }
  bool ok = maxerr < 0.03 && maxlse < 0.01;
  if(!ok) fails++;
  printf("%s B=%d Sq=%d Hq=%d Hkv=%d D=%d page=%d splits=%d causal=%d wl=%d cap=%.0f app=%d il=%d rot=%d: maxerr %.4g lse %.4g\n", ok?"ok  ":"FAIL", c.B,c.Sq,c.Hq,c.Hkv,c.D,c.page,c.splits,c.causal,c.wl,c.softcap,c.append,c.interleaved,c.rot,maxerr,maxlse);
  cudaFree(dq);cudaFree(dk);cudaFree(dv);cudaFree(dout);cudaFree(dkn);cudaFree(dvn);cudaFree(dlen);cudaFree(dtab);cudaFree(dlse);cudaFree(dcos);cudaFree(dsin);cudaFree(ws);
}
void bench(int B, int S, int Hkv, int page, int splits, float copy_gbs) {
  int Hq=32, D=128; size_t per = (size_t)B*S*Hkv*D; // elements per cache
  int nbuf = std::max<size_t>(1, (size_t)(200e6 / (per*4)) + 1); nbuf = std::min(nbuf, 8);
  if (per*4*nbuf > 60e9) { printf("skip\n"); return; }
  std::vector<void*> ks(nbuf), vs(nbuf); for(int i=0;i<nbuf;i++){CK(cudaMalloc(&ks[i],per*2)); CK(cudaMalloc(&vs[i],per*2)); CK(cudaMemset(ks[i],0x3c,per*2)); CK(cudaMemset(vs[i],0x3c,per*2));}
  void *q,*o; int* len; int* tab; CK(cudaMalloc(&q,B*Hq*D*2)); CK(cudaMalloc(&o,B*Hq*D*2)); CK(cudaMemset(q,0x3c,B*Hq*D*2)); CK(cudaMalloc(&len,B*4));
  std::vector<int> hl(B,S); CK(cudaMemcpy(len,hl.data(),B*4,cudaMemcpyHostToDevice));
  int maxb = page? S/page:0; std::vector<int> ht(std::max(1,B*maxb)); for(int i=0;i<B*maxb;i++) ht[i]=i; std::mt19937 r(1); std::shuffle(ht.begin(),ht.end(),r);
  CK(cudaMalloc(&tab,ht.size()*4)); CK(cudaMemcpy(tab,ht.data(),ht.size()*4,cudaMemcpyHostToDevice));
  DecodeAttentionParams prm; prm.num_splits=splits; if(page){prm.block_table=tab; prm.max_blocks=maxb;}
  size_t wsb = decode_attention_workspace_size(B,1,Hq,Hkv,D,S,splits); void* ws; CK(cudaMalloc(&ws,wsb+16));
  auto call=[&](int i){ AttnConstTensor kc = page? make_attn_tensor((const void*)ks[i],DType::kBF16,B*maxb,page,Hkv,D) : make_attn_tensor((const void*)ks[i],DType::kBF16,B,S,Hkv,D);
    AttnConstTensor vc = page? make_attn_tensor((const void*)vs[i],DType::kBF16,B*maxb,page,Hkv,D) : make_attn_tensor((const void*)vs[i],DType::kBF16,B,S,Hkv,D);
    decode_attention(make_attn_tensor((const void*)q,DType::kBF16,B,1,Hq,D),kc,vc,len,make_attn_tensor(o,DType::kBF16,B,1,Hq,D),nullptr,prm,ws,wsb); };
  cudaStream_t st; CK(cudaStreamCreate(&st));
  for(int i=0;i<3;i++) call(i%nbuf);
  CK(cudaDeviceSynchronize());
  // graph of nbuf*? calls
  int reps = 20; cudaGraph_t g; cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
  for(int i=0;i<reps;i++){ AttnConstTensor kc = page? make_attn_tensor((const void*)ks[i%nbuf],DType::kBF16,B*maxb,page,Hkv,D) : make_attn_tensor((const void*)ks[i%nbuf],DType::kBF16,B,S,Hkv,D);
    AttnConstTensor vc = page? make_attn_tensor((const void*)vs[i%nbuf],DType::kBF16,B*maxb,page,Hkv,D) : make_attn_tensor((const void*)vs[i%nbuf],DType::kBF16,B,S,Hkv,D);
    decode_attention(make_attn_tensor((const void*)q,DType::kBF16,B,1,Hq,D),kc,vc,len,make_attn_tensor(o,DType::kBF16,B,1,Hq,D),nullptr,prm,ws,wsb,st);}
  CK(cudaStreamEndCapture(st,&g)); CK(cudaGraphInstantiate(&ge,g,0));
  CK(cudaGraphLaunch(ge,st)); CK(cudaStreamSynchronize(st));
  cudaEvent_t a,b; cudaEventCreate(&a); cudaEventCreate(&b); std::vector<float> ts;
  for(int it=0;it<10;it++){ cudaEventRecord(a,st); cudaGraphLaunch(ge,st); cudaEventRecord(b,st); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms,a,b); ts.push_back(ms/reps);} std::sort(ts.begin(),ts.end());
  double us = ts[5]*1e3; double gbs = per*2*2/ (us*1e3);
  int sp = splits? splits : decode_attention_num_splits(B,Hkv,Hq/Hkv,D,S,132);
  printf("bench B=%4d S=%7d Hkv=%d page=%3d splits=%3d: %8.1f us %7.0f GB/s %5.1f%% of copy\n",B,S,Hkv,page,sp,us,gbs,100*gbs/copy_gbs);
  for(int i=0;i<nbuf;i++){cudaFree(ks[i]);cudaFree(vs[i]);} cudaFree(q);cudaFree(o);cudaFree(len);cudaFree(tab);cudaFree(ws); cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
}
float copy_bw(){ size_t n = 1<<30; void *x,*y; CK(cudaMalloc(&x,n)); CK(cudaMalloc(&y,n)); cudaEvent_t a,b; cudaEventCreate(&a); cudaEventCreate(&b);
  for(int i=0;i<3;i++) cudaMemcpy(y,x,n,cudaMemcpyDeviceToDevice); cudaEventRecord(a); for(int i=0;i<10;i++) cudaMemcpy(y,x,n,cudaMemcpyDeviceToDevice); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms,a,b);
  cudaFree(x); cudaFree(y); return 2.0*n*10/(ms*1e6); }
int main(int argc, char** argv){
  std::mt19937 rng(42);
  if (argc > 1 && std::string(argv[1]) == "exp") {
    float copy = copy_bw();
    if (argc > 2 && std::string(argv[2]) == "paged") {
      for (int B: {1, 8, 32}) for (int pg: {0, 16, 64, 256}) bench(B,32768,8,pg,0,copy);
      bench(1,131072,8,0,0,copy); bench(1,131072,8,16,0,copy);
      return 0;
    }
    if (argc > 2) {
      for (int S: {8192, 32768, 131072}) for (int sp: {8, 12, 16, 24, 33}) bench(1,S,8,0,sp,copy);
      for (int S: {32768, 131072}) for (int sp: {0, 64, 128}) bench(1,S,1,0,sp,copy);
      for (int sp: {0, 16, 32}) bench(8,32768,1,0,sp,copy);
      for (int sp: {2, 3, 4}) bench(8,8192,8,0,sp,copy);
      return 0;
    }
    for (int sp: {0,16,24,33,48,66}) bench(1,32768,8,0,sp,copy);
    for (int sp: {0,33,66,128}) bench(1,131072,8,0,sp,copy);
    bench(8,32768,8,0,0,copy); bench(8,32768,8,0,8,copy); bench(32,8192,8,0,0,copy); bench(32,8192,8,0,2,copy);
    for (int sp: {0,128}) bench(1,131072,1,0,sp,copy);
    bench(1,8192,8,0,0,copy); bench(1,1024,8,0,0,copy);
    bench(1,32768,8,16,0,copy);
    return 0;
  }
  std::vector<Case> cs = {
    {1,1,32,8,128,{1000},0,0,false,-1,0,false,false,0},
    {3,1,32,8,128,{0,1,1000},0,1,false,-1,0,false,false,0},
    {3,1,32,8,128,{63,64,4097},0,0,false,-1,0,false,false,0},
    {3,1,32,8,128,{63,64,4097},0,7,false,-1,0,false,false,0},
    {3,1,32,8,128,{65,100,2000},16,0,false,-1,0,false,false,0},
    {2,1,32,8,128,{300,1000},48,5,false,-1,0,false,false,0},
    {2,4,32,8,128,{300,1000},64,0,true,-1,0,false,false,0},
    {2,16,28,4,128,{300,1000},0,3,true,100,0,false,false,0},
    {2,5,32,1,64,{300,1000},0,0,true,-1,30.f,false,false,0},
    {2,3,16,16,256,{300,1000},256,0,true,50,0,false,false,0},
    {2,2,8,2,64,{0,77},0,2,false,-1,0,false,false,0},
    {2,1,32,8,128,{10,700},16,0,false,-1,0,true,false,0},
    {2,3,32,8,128,{10,700},0,4,true,-1,0,true,true,64},
    {2,16,32,1,128,{0,33},0,0,true,-1,0,true,false,0},
  };
  for (auto& c: cs) run_case(c, rng);
  printf("fails %d\n", fails);
  // copy bw
  size_t n = 1<<30; void *x,*y; CK(cudaMalloc(&x,n)); CK(cudaMalloc(&y,n)); cudaEvent_t a,b; cudaEventCreate(&a); cudaEventCreate(&b);
  for(int i=0;i<3;i++) cudaMemcpy(y,x,n,cudaMemcpyDeviceToDevice); cudaEventRecord(a); for(int i=0;i<10;i++) cudaMemcpy(y,x,n,cudaMemcpyDeviceToDevice); cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms,a,b);
  float copy = 2.0*n*10/(ms*1e6); printf("copy %.0f GB/s\n", copy); cudaFree(x); cudaFree(y);
  int Bs[]={1,8,32,128}; int Ss[]={1024,8192,32768,131072};
  for(int hkv: {8,1}) for(int B: Bs) for(int S: Ss){ if((double)B*S*hkv*128*4 > 40e9) continue; bench(B,S,hkv,0,0,copy);} 
  for(int page: {16,64}) for(int B: {1,8,32}) bench(B,32768,8,page,0,copy);
  for(int sp: {8,16,32,64}) bench(1,32768,8,0,sp,copy);
  return fails? 1:0;
}
