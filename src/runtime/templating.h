/* Type-generic C: a *.template.c file is included once per element type with
 * FD_REAL (float or double) and FD_PREFIX (s or d) defined, BLAS style. */
#ifndef FASTDECONV_TEMPLATING_H
#define FASTDECONV_TEMPLATING_H
#define FD_CAT_(a, b) a##b
#define FD_CAT(a, b) FD_CAT_(a, b)
/* FD_FN(deconv_col2im_band) -> fd_sdeconv_col2im_band / fd_ddeconv_col2im_band */
#define FD_FN(name) FD_CAT(FD_CAT(fd_, FD_PREFIX), name)
#endif
