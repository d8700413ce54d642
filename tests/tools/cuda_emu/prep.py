# prep.py: rewrites kernel<<<grid, block, shmem, stream>>>(args); into emu_launch(...) calls for the host emulation.
import re, sys
src = open(sys.argv[1]).read()
# kernel<T...><<<grid, block, shmem, stream>>>(args);  ->  emu_launch(dim3(grid), dim3(block), [&] { kernel<T...>(args); });
pat = re.compile(r'([A-Za-z_]\w*(?:<[^<>;]*?>)?)\s*<<<(.*?)>>>\s*\((.*?)\);', re.S)
def rep(m):
    cfg = [c.strip() for c in m.group(2).split(',')]
    return 'emu_launch(dim3(%s), dim3(%s), [&] { %s(%s); });' % (cfg[0], cfg[1], m.group(1), m.group(3))
out = pat.sub(rep, src)
sys.stdout.write(out)
