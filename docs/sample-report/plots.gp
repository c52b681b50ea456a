# Draws the report's plots: cd to the report folder, then gnuplot plots.gp
reset
set terminal pngcairo noenhanced size 900,540 font 'sans,10'
set output 'getcpu.png'
set title 'Which CPU am I on? ns per call (median, log scale)'
set style data histograms
set style fill solid 0.8
set boxwidth 0.7
set logscale y
set ylabel 'ns per call'
set xtics rotate by -35 scale 0
set grid ytics
set key off
plot 'data/getcpu.dat' using 2:xtic(1) lc rgb '#3060a0', '' using 0:2:(sprintf('%.2f', $2)) with labels offset 0,0.7 notitle
unset logscale
set xtics norotate
reset
set terminal pngcairo noenhanced size 900,540 font 'sans,10'
set output 'counter.png'
set title "Counter increment: scaling with threads"
set xlabel 'threads'
set ylabel 'ns per operation of the whole process (median, log scale)'
set logscale xy
set autoscale xfix
set offsets graph 0.03, graph 0.03, 0, 0
set key outside right
set grid
plot for [i=2:7] 'data/counter.dat' using 1:i with linespoints lw 2 title columnheader(i)
unset logscale
reset
set terminal pngcairo noenhanced size 900,540 font 'sans,10'
set output 'list.png'
set title "Free list push+pop: scaling with threads"
set xlabel 'threads'
set ylabel 'ns per operation of the whole process (median, log scale)'
set logscale xy
set autoscale xfix
set offsets graph 0.03, graph 0.03, 0, 0
set key outside right
set grid
plot for [i=2:5] 'data/list.dat' using 1:i with linespoints lw 2 title columnheader(i)
unset logscale
reset
set terminal pngcairo noenhanced size 900,540 font 'sans,10'
set output 'pool.png'
set title 'Resident bytes per 8-byte per-CPU counter (log scale)'
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8
set logscale y
set ylabel 'bytes'
set xlabel 'threads'
set key outside right
set grid ytics
plot for [i=2:6] 'data/pool.dat' using i:xtic(1) title columnheader(i)
unset logscale
reset
set terminal pngcairo noenhanced size 900,540 font 'sans,10'
set output 'malloc_rss.png'
set title "The 400-thread service: RSS by allocator, MiB (median)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8
set ylabel 'MiB'
set xlabel ''
set key top left
set grid ytics
plot 'data/malloc_rss.dat' using 2:xtic(1) title columnheader(2), '' using 3 title columnheader(3)
reset
set terminal pngcairo noenhanced size 900,540 font 'sans,10'
set output 'malloc_latency.png'
set title 'Single-thread malloc+free pair by size, ns (median)'
set logscale xy 2
set xlabel 'bytes'
set ylabel 'ns per pair (log scale)'
set key outside right
set grid
plot for [i=2:7] 'data/malloc_latency.dat' using 1:i with linespoints lw 2 title columnheader(i)
unset logscale
reset
set terminal pngcairo noenhanced size 900,540 font 'sans,10'
set output 'context_switch.png'
set title 'Scheduler benchmarks: run time relative to rseq registration off (mean ± standard deviation)'
set style data histograms
set style histogram errorbars gap 2 lw 1
set style fill solid 0.8
set yrange [0:*]
set ylabel 'time / time with registration off'
set xtics rotate by -25 scale 0
set key outside right
set grid ytics
plot 'data/context_switch.dat' using 2:3:xtic(1) title 'off', 'data/context_switch.dat' using 4:5 title 'glibc', 'data/context_switch.dat' using 6:7 title 'glibc+lib', 'data/context_switch.dat' using 8:9 title 'percpu'
