#!/usr/bin/env bash
# check_links.sh BINARY CUDA: how a LibTorch executable is linked.
# - libstdc++ comes before every LibTorch library in its DT_NEEDED list
#   (torch 2.x's libtorch.so exports a broken copy of std::filesystem that
#   would otherwise win: exec/CMakeLists.txt);
# - every library ldd resolves is found;
# - CUDA=ON (a -DELASTICPIPE_CUDA=ON build): it loads libtorch_cuda,
#   libc10_cuda and NCCL; CUDA=OFF: none of them.
set -u
bin=$1
cuda=$2
fail=0
bad() { echo "FAIL: $*"; fail=1; }

needed=$(readelf -d "$bin" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
first_torch=$(printf '%s\n' "$needed" | grep -n -E '^lib(torch|c10)' | head -1 | cut -d: -f1)
stdcxx=$(printf '%s\n' "$needed" | grep -n '^libstdc++' | head -1 | cut -d: -f1)
[ -n "$first_torch" ] || bad "$bin does not link LibTorch: $(echo $needed)"
if [ -z "$stdcxx" ]; then
  # Which case it is: libstdc++ linked into the binary (it then defines
  # std::filesystem itself), or dropped from the link (they come from elsewhere).
  own=$(nm -D --defined-only "$bin" 2> /dev/null | grep -c ' _ZNSt10filesystem' || true)
  bad "$bin has no libstdc++ in DT_NEEDED: $(echo $needed); it defines $own std::filesystem symbols itself"
fi
if [ -n "$first_torch" ] && [ -n "$stdcxx" ] && [ "$stdcxx" -gt "$first_torch" ]; then
  bad "libstdc++ is DT_NEEDED entry $stdcxx, after LibTorch's entry $first_torch: $(echo $needed)"
fi

libs=$(ldd "$bin") || bad "ldd $bin failed"
missing=$(printf '%s\n' "$libs" | grep 'not found')
[ -z "$missing" ] || bad "unresolved libraries: $missing"
for lib in libtorch_cuda.so libc10_cuda.so libnccl.so; do
  if printf '%s\n' "$libs" | grep -q "$lib"; then
    [ "$cuda" = ON ] || bad "a build without ELASTICPIPE_CUDA loads $lib"
  else
    [ "$cuda" != ON ] || bad "the CUDA build does not load $lib"
  fi
done
[ "$cuda" = ON ] && printf '%s\n' "$libs" | grep -E 'libtorch_cuda|libc10_cuda|libnccl' | sed 's/^[[:space:]]*/  /'
[ "$fail" -eq 0 ] && echo "1 passed, 0 failed" || echo "0 passed, 1 failed"
exit $fail
