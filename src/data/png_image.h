/* png_image.h: one grey PNG as float pixels, by the same libpng reader as the PNG slice stacks (png_stack.c): 8- or
 * 16-bit grey (1, 2 and 4-bit widened to 8), values as stored (no gamma), libpng's reports in our one line. What
 * data/views.c reads a CT's X-ray views (DRR PNGs) with. */
#pragma once
#include <stddef.h>

/* Reads the PNG at path: its size and bit depth, and when px is not NULL its pixels, *px = malloc'd [h][w] floats
 * (caller frees). 1, or 0 and why (no such file, not a PNG, not grey, damaged, ...). */
int png_read_grey(const char *path, int *w, int *h, int *depth, float **px, char *why, size_t why_len);
